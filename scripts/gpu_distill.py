"""Self-distil and train an EAGLE head on a GPU, inside a fixed wall-clock budget.

The command line over `specdec_core.training.distill` (what each stage does is there): the
bundled head's GPU stages were made with it (its card records the arguments).

1. `export` (on any machine with the ShareGPT package): ShareGPT's first user prompts,
   chat-templated for the target and split like `specdec train` splits them, as one .npz.
2. `run` (on the GPU): answer them within `--gen-seconds`, train until `--total-seconds`, save
   OUT/head with its card and OUT/report.json. `--answers` trains on an earlier run's answers;
   `--arch eagle3` trains a fresh EAGLE-3-layout head (`--init ''`); `--layers N` grows the
   continued head.
3. `smoke`: the same stages on a random model of the target's shape, a few batches each.

    python scripts/gpu_distill.py export --out .xfer/prompts.npz
    python scripts/gpu_distill.py run --target model.gguf --prompts prompts.npz --out OUT
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specdec_core.errors import SpecdecError  # noqa: E402
from specdec_core.training import distill  # noqa: E402

LOG = distill.Log()  # the budget counts from here, once the modules are loaded


def main() -> None:
    """The flags as `distill` settings; a flag not given takes the settings' default."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    ex = sub.add_parser("export", argument_default=argparse.SUPPRESS)
    ex.add_argument("--target")
    ex.add_argument("--out", required=True)
    ex.add_argument("--max-prompt", type=int)
    ex.add_argument("--seed", type=int)
    for name in ("run", "smoke"):
        p = sub.add_parser(name, argument_default=argparse.SUPPRESS)
        p.add_argument("--target")
        p.add_argument("--prompts", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--work")
        p.add_argument("--init", help="head to continue; '' = fresh")
        p.add_argument("--draft-vocab", type=int, help="fresh head only")
        p.add_argument("--device")
        p.add_argument("--batch", type=int)
        p.add_argument("--gen-batch-tokens", type=int)
        p.add_argument("--max-new", type=int)
        p.add_argument("--max-len", type=int)
        p.add_argument("--gen-seconds", type=float)
        p.add_argument("--total-seconds", type=float)
        p.add_argument("--reserve-seconds", type=float)
        p.add_argument("--max-epochs", type=int)
        p.add_argument("--batch-tokens", type=int)
        p.add_argument("--lr", type=float)
        p.add_argument("--unroll", type=int)
        p.add_argument("--arch", choices=["eagle1", "eagle3"])
        p.add_argument("--ce-weight", type=float, help="default 0.1; eagle3 1")
        p.add_argument("--layers", type=int, help="eagle1 decoder layers")
        p.add_argument("--answers", help="earlier run's greedy_ids.npz")
        p.add_argument("--val-kinds", type=int, help="held-out prompts per kind (0 = none)")
        p.add_argument("--seed", type=int)
    args = parser.parse_args()
    options = {k: v for k, v in vars(args).items() if k != "mode"}
    try:
        if args.mode == "export":
            distill.export_prompts(distill.ExportSettings(**options), LOG)
        else:
            settings = distill.DistillSettings(**options, smoke=args.mode == "smoke")
            distill.run(settings, "python scripts/gpu_distill.py " + " ".join(sys.argv[1:]), LOG)
    except SpecdecError as exc:
        sys.exit(f"gpu_distill: {exc}")


if __name__ == "__main__":
    main()
