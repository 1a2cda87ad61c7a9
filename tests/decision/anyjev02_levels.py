"""Run by test_levels.py with anyjev 0.2.0's Python (a side environment): its L1 and L2 on a model dir.

python anyjev02_levels.py MODEL_DIR   ->  prints JSON {temperature, l1, l2, layer, kind}
"""

import json
import sys

from anyjev import Decider, Question
from anyjev.backends.hf import HFBackend

sys.path.insert(0, sys.argv[2])
from levels_data import LABELS, OPTIONS, QUESTION, STATES  # noqa: E402

decider = Decider(HFBackend(sys.argv[1], device="cpu", dtype="float32"), prior="batch")
q = Question.choice(QUESTION, OPTIONS)
art = decider.calibrate(q, STATES, LABELS)
l1 = [d.probs.tolist() for d in decider.decide_batch(STATES[:10], q, level="L1")]
head = decider.fit_head(q, STATES, LABELS, listing="canonical")
l2 = [d.probs.tolist() for d in decider.decide_batch(STATES[:10], q, level="L2")]
print(
    json.dumps(
        {
            "temperature": art["temperature"],
            "l1": l1,
            "l2": l2,
            "layer": head["layer_abs"],
            "kind": head["method"],
        }
    )
)
