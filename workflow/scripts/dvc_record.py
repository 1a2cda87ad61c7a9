"""Record a stage Snakemake just built into dvc.lock, so that ``dvc status`` sees it up to date.

    python workflow/scripts/dvc_record.py train-demo

Every Snakemake rule ends with this step (the rule files are generated: workflow/rule_files.py).
It is what ``dvc commit -f STAGE`` does, without relinking the outputs (their files and times stay
as Snakemake wrote them): the stage's dependencies and outputs are hashed into dvc.lock and the
outputs stored in DVC's cache, as ``dvc repro`` leaves them. Outside a DVC repository (no ``.dvc/``)
it does nothing. Jobs that run at once (``snakemake -c2``) take turns on a lock file, and a
recording that fails prints one line and leaves the job's result alone: DVC then calls the stage
stale, as it would without this step.
"""

from __future__ import annotations

import argparse
import fcntl
import sys
import time
from pathlib import Path

TURN_LOCK = ".dvc/tmp/snakemake-record.lock"  # the jobs of one snakemake call take turns here
RETRIES = 30  # DVC's own lock held by another dvc command (dvc status in another terminal): wait


def record(stage: str, root: Path = Path(".")) -> bool:
    """Commit ``stage`` of ``root``'s dvc.yaml into dvc.lock; False outside a DVC repository."""
    if not (root / ".dvc").is_dir():
        return False
    from dvc.lock import LockError
    from dvc.repo import Repo

    lock_path = root / TURN_LOCK
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        for attempt in range(RETRIES):
            try:
                with Repo(str(root)) as repo:
                    repo.commit(stage, force=True, relink=False)
                return True
            except LockError:
                if attempt == RETRIES - 1:
                    raise
                time.sleep(1)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", help="the DVC stage (dvc.yaml), e.g. train-demo")
    args = parser.parse_args(argv)
    try:
        record(args.stage)
    except Exception as e:  # noqa: BLE001 - a bookkeeping step: the job's result stands
        print(
            f"dvc_record: stage {args.stage} built but not recorded in dvc.lock ({type(e).__name__}: {e}); "
            f"`dvc commit -f {args.stage}` records it",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
