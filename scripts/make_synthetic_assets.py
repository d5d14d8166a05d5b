"""Regenerate the embedded synthetic datasets and their tokenizer (deterministic: same code, same bytes).

    python scripts/make_synthetic_assets.py                 # rewrites dschat/assets/{synthetic,synthetic-long,tokenizer}
    python scripts/make_synthetic_assets.py --out-dir DIR   # writes them under DIR instead

The tasks, their ground-truth rule and the sizes are documented in dschat/data/synthetic_task.py (short)
and dschat/data/synthetic_long_task.py (long; same vocabulary, so the tokenizer is trained on the short
task's texts only and stays as it was).
"""
from pathlib import Path

from dschat.data.synthetic_long_task import write_long_assets
from dschat.data.synthetic_task import ASSETS_DIR, write_synthetic_assets
from dschat.core.entrypoint import ArgumentParser


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", type=Path, default=ASSETS_DIR, help="assets folder to write into")
    args = parser.parse_args()
    write_long_assets(args.out_dir)
    for path in write_synthetic_assets(args.out_dir):
        print(f"{path.stat().st_size:>9d}  {path}")


if __name__ == "__main__":
    main()
