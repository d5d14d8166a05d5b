"""``python -m evaluation.study_positions``: samples where the long responses changed (:mod:`evaluation.study.positions`)."""
from evaluation.study.positions import main

if __name__ == "__main__":
    main()
