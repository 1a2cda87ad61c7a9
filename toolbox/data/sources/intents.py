"""Generated intent classification: banking-style customer messages, one of 12 intents each."""

from __future__ import annotations

import random

from toolbox.core.bounds import AtLeastOne, NonNegativeInt
from toolbox.core.errors import ConfigError
from toolbox.core.registries import SOURCES
from toolbox.data.base import Splits

# intent (the option the model is shown) -> the core phrasings of a customer message. Every
# phrasing names its intent's keyword (never first, never another intent's): the task is learnable
# by a model trained from scratch in minutes on a CPU, which is what the example needs.
INTENTS: dict[str, tuple[str, ...]] = {
    "balance": (
        "what is my balance",
        "show me the balance",
        "how big is my balance",
        "tell me the balance now",
    ),
    "transfer": (
        "make a transfer to my brother",
        "I need a transfer to savings",
        "start a transfer for rent",
        "can you do a transfer to a friend",
    ),
    "card": ("I lost my card", "my card is missing", "I dropped my card somewhere", "someone has my card"),
    "refund": (
        "I want a refund",
        "the shop owes me a refund",
        "where is my refund",
        "please send the refund",
    ),
    "address": (
        "I moved to a new address",
        "update my address",
        "my address is different now",
        "send letters to the new address",
    ),
    "account": (
        "I would like a new account",
        "open an account for me",
        "close my account",
        "how do I get an account",
    ),
    "loan": (
        "what interest is on a loan",
        "I need a loan for a car",
        "how expensive is a loan",
        "can I get a loan for a house",
    ),
    "bill": (
        "settle my electricity bill",
        "pay the water bill",
        "my phone bill is due",
        "clear the gas bill",
    ),
    "fraud": (
        "I think this is fraud",
        "report fraud on my payments",
        "there was fraud yesterday",
        "a stranger did fraud with my money",
    ),
    "limit": (
        "raise the limit on spending",
        "what is my daily limit",
        "lower the limit please",
        "I hit the limit again",
    ),
    "exchange": (
        "what is the exchange for euros",
        "I need an exchange of pounds",
        "the exchange for yen",
        "how good is the exchange today",
    ),
    "pin": ("I forgot my pin", "reset the pin", "change my pin code", "my pin does not work"),
}
OPENERS = ("", "hi, ", "hello, ", "excuse me, ", "quick question: ", "good morning, ", "hey, ", "sorry, ")
CLOSERS = ("", " please", " thanks", " right now", " asap", " if you can", " thank you", " today")
QUESTION = "Which intent?"


@SOURCES.register("intents")
def intents(
    num_train: AtLeastOne = 2000, num_test: NonNegativeInt = 400, num_intents: AtLeastOne = 12, seed: int = 0
) -> Splits:
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
