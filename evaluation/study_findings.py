"""``python -m evaluation.study_findings``: prints or writes the README's study section (:mod:`evaluation.study.findings`)."""
from evaluation.study.findings import main

if __name__ == "__main__":
    main()
