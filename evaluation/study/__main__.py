"""``python -m evaluation.study run|report|plan|verify ...``: the study's runner (:mod:`evaluation.study.runner`)."""
from evaluation.study.runner import main

main()
