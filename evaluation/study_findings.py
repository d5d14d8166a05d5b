"""``python -m evaluation.study_findings``: writes the study page's bullets and tables (:mod:`evaluation.study.findings`)."""
from evaluation.study.findings import main

if __name__ == "__main__":
    main()
