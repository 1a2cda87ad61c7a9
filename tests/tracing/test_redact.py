"""The built-in redactor: what each rule removes, what it leaves, and its cheap pre-check never
skipping a string a rule would change."""

from __future__ import annotations

import random
import string

import pytest

from toolbox.tracing.redact import Redactor, default_redactor

SECRETS = [
    ("key sk-abcdefghijklmnopqrstu", "api_key"),
    ("anthropic sk-ant-api03-abcdefghijklmnop", "api_key"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "api_key"),
    ("gh ghp_abcdefghijklmnopqrstuvwxyz0123456789", "api_key"),
    ("slack xoxb-1234567890-abcdef", "api_key"),
    ("hf hf_abcdefghijklmnopqrstuvwxyzABCDEF", "api_key"),
    ("google AIzaSyA1234567890abcdefghijklmnopqrstuv", "api_key"),
    ("sent Bearer eyJhbGciOiJIUzI1NiJ9.abc", "bearer"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc", "secret"),
    ('config password="hunter22"', "secret"),
    ("api_key=abcd1234", "secret"),
    ("TOKEN: abcdefgh", "secret"),
    ("write to jane.doe+x@mail.example.co.uk", "email"),
    ("call +1 415 555 2671 now", "phone"),
    ("call +44 20 7946 0958", "phone"),
    ("office (415) 555-2671", "phone"),
    ("office 415.555.2671", "phone"),
    ("office 415-555 2671", "phone"),
    ("office 415.555-2671", "phone"),
    ("office 415.555 2671", "phone"),
]
KEPT = [
    "12+30=42",
    "What is 123456789 * 2? It is 246913578.",
    "5+35 and 7 + 8 - 3",
    "the model emits 17 tokens",
    "3.14159 and 2.71828",
    "2026-12-01T19:00:00",
    "call calculator with expression 415 + 555",
]


@pytest.mark.parametrize("text,label", SECRETS)
def test_each_rule_redacts_its_kind(text, label):
    r = Redactor()
    assert r.needed(text)
    out = r.text(text)
    assert f"[REDACTED:{label}]" in out and r.count >= 1


@pytest.mark.parametrize("text", KEPT)
def test_task_text_is_left_alone(text):
    assert default_redactor.text(text) == text


def test_the_precheck_never_skips_what_a_rule_would_change():
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + " +-.()@_:=\"'/"
    plain = Redactor()
    plain.needed = lambda text: True  # noqa: E731 - the same rules without the pre-check
    pieces = [s for s, _ in SECRETS] + KEPT + ["t=1796151993.312621", "415 555", "(12)"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(5, 40)))
        if rng.random() < 0.3:
            text += " " + rng.choice(pieces)
        assert default_redactor.text(text) == plain.text(text), text


def test_extra_rules_always_run():
    r = Redactor(extra=[("ticket", r"TCK-\d+")])
    assert r.needed("TCK-12") and r.text("see TCK-12") == "see [REDACTED:ticket]"


def test_the_precheck_covers_whitespace_unicode_digits_and_case_folding():
    rng = random.Random(1)
    plain = Redactor()
    plain.needed = lambda text: True  # noqa: E731
    words = ["token", "TOKEN", "ſecret", "Kеy", "api_Key", "authorİzation", "passwd", "bearer", "BEARER",
             "sk-", "xoxb-", "ghp_", "hf_", "AKIA", "AIza", "+", "(", ")", "@", ":", "=", "\t", "\n", "\u00a0",
             "\u3000", "\u0663", "\u0967", "415", "555", "2671", "+44", ".", "-", " ", "x", "é", "_"]  # fmt: skip
    for _ in range(6000):
        text = "".join(
            rng.choice(words) if rng.random() < 0.5 else rng.choice("ab1234567890 ")
            for _ in range(rng.randint(3, 30))
        )
        assert default_redactor.text(text) == plain.text(text), repr(text)
    for text in ["token  : abcdefgh", "TOKEN\t=\tabcdefgh", "ſecret: abcdefgh", "office 415\t555\t2671",
                 "office \u0664\u0661\u0665-\u0665\u0665\u0665-\u0662\u0666\u0667\u0661", "call\u00a0+1\u00a0415\u00a0555\u00a02671"]:  # fmt: skip
        assert default_redactor.needed(text) and plain.text(text) != text, repr(text)


def test_needed_any_reads_a_records_strings_not_its_json_keys():
    assert not default_redactor.needed_any(["chat", "user", "the model emits 17 tokens", "2+3 is 5"])
    assert default_redactor.needed_any(["user", "mail ann@example.com"])
    assert default_redactor.needed_any(["key:", " sk-abcdefghijklmnopqrstu"])  # conservative across strings
    assert Redactor(extra=[("ticket", r"TCK-\d+")]).needed_any(["nothing"])
