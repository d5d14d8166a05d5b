"""Regenerate the embedded synthetic dataset and its tokenizer (deterministic: same code, same bytes).

    python scripts/make_synthetic_assets.py                 # rewrites dschat/assets/{synthetic,tokenizer}
    python scripts/make_synthetic_assets.py --out-dir DIR   # writes DIR/{synthetic,tokenizer} instead

The task, its ground-truth rule and the sizes are documented in dschat/utils/data/synthetic_task.py.
"""
import argparse
from pathlib import Path

from dschat.utils.data.synthetic_task import ASSETS_DIR, write_synthetic_assets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=ASSETS_DIR, help="assets folder to write into")
    args = parser.parse_args()
    for path in write_synthetic_assets(args.out_dir):
        print(f"{path.stat().st_size:>9d}  {path}")


if __name__ == "__main__":
    main()
