"""Generated intent classification: banking-style customer messages, one of 12 intents each."""

from __future__ import annotations

import random

from toolbox.core.errors import ConfigError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits

# intent (the option the model is shown) -> the core phrasings of a customer message
INTENTS: dict[str, tuple[str, ...]] = {
    "check balance": (
        "what is my balance",
        "how much money is in my account",
        "show my current balance",
        "how much do I have left",
    ),
    "transfer money": (
        "send money to my brother",
        "move funds to savings",
        "wire cash to a friend",
        "pay my sister back from my account",
    ),
    "lost card": (
        "I cannot find my card",
        "my card is missing",
        "I dropped my card somewhere",
        "my wallet with the card is gone",
    ),
    "refund": (
        "I want my money back",
        "the shop charged me twice",
        "return the payment for my order",
        "I was billed for something I returned",
    ),
    "change address": (
        "I moved to a new house",
        "update where I live",
        "my home address is different now",
        "send letters to my new flat",
    ),
    "open account": (
        "I would like a new account",
        "start a savings account for me",
        "how do I become a customer",
        "set up an account for my son",
    ),
    "close account": (
        "shut down my account",
        "I want to leave the bank",
        "end my membership",
        "delete my account for good",
    ),
    "loan rates": (
        "what interest do you charge on loans",
        "how expensive is borrowing",
        "rates for a car loan",
        "can I borrow for a house",
    ),
    "pay bill": (
        "settle my electricity invoice",
        "pay the water company",
        "my phone bill is due",
        "clear the gas invoice today",
    ),
    "report fraud": (
        "someone used my card without asking",
        "there are payments I never made",
        "a stranger took money from me",
        "my account was hacked",
    ),
    "card limit": (
        "raise the spending cap on my card",
        "my card keeps getting declined at the max",
        "how high can my card go",
        "lower the daily limit please",
    ),
    "exchange rate": (
        "how many euros for a dollar",
        "convert pounds to yen",
        "what is the rate for francs",
        "foreign currency prices today",
    ),
}
OPENERS = ("", "hi, ", "hello, ", "excuse me, ", "quick question: ", "good morning, ", "hey, ", "sorry, ")
CLOSERS = ("", " please", " thanks", " right now", " asap", " if you can", " thank you", " today")
QUESTION = "Which intent does the customer message have?"


@SOURCES.register("intents")
def intents(num_train: int = 2000, num_test: int = 400, num_intents: int = 12, seed: int = 0) -> Splits:
    """Customer messages with their intent, as records {text, label, options, question}.

    A message is an opener, one of four phrasings of its intent and a closer (128 distinct messages
    per intent); train and test hold disjoint messages. ``options`` lists the intents in one fixed
    order and ``label`` indexes it.

    Args:
        num_train: training messages.
        num_test: held-out messages, none of them a training message.
        num_intents: how many of the 12 intents to use (at least 2).
        seed: seed of the draw.
    """
    names = list(INTENTS)[:num_intents]
    if not 2 <= num_intents <= len(INTENTS):
        raise ConfigError(f"data.source.num_intents: {num_intents}; use 2 to {len(INTENTS)}.")
    pool = [
        (opener + phrase + closer, label)
        for label, name in enumerate(names)
        for phrase in INTENTS[name]
        for opener in OPENERS
        for closer in CLOSERS
    ]
    if num_train + num_test > len(pool):
        raise ConfigError(
            f"data.source: {num_train} + {num_test} messages asked, but {num_intents} intents give "
            f"{len(pool)} distinct ones; lower data.source.num_train or num_test."
        )
    random.Random(seed).shuffle(pool)

    def record(text: str, label: int) -> dict:
        return {"text": text, "label": label, "options": names, "question": QUESTION}

    train = [record(*x) for x in pool[:num_train]]
    test = [record(*x) for x in pool[num_train : num_train + num_test]]
    return Splits(train, test, {"num_classes": len(names)})
