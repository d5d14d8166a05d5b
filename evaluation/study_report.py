"""``python -m evaluation.study_report``: re-renders the study report from its runs.jsonl (:mod:`evaluation.study.report`)."""
from evaluation.study.report import main

if __name__ == "__main__":
    main()
