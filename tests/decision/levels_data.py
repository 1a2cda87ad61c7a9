"""The labelled items of the L1/L2 checks (shared with the anyjev 0.2.0 side script)."""

QUESTION = "Which intent is this?"
OPTIONS = ["lost card", "balance", "transfer", "refund"]
PHRASES = ["I lost my card", "what is my balance", "transfer money now", "I want a refund"]
FILLERS = ["", " please", " today", " asap", " thanks", " now please", " again", " quickly"]
STATES = [PHRASES[i % 4] + FILLERS[(i // 4) % len(FILLERS)] for i in range(40)]
# labels mostly follow the phrase, with every fifth item relabelled: the temperature lands inside its range
LABELS = [(i % 4) if i % 5 else (i + 1) % 4 for i in range(40)]
