"""The PPO vs MA-PPO study, one module per concern; each imports only the ones listed before it:

- :mod:`~evaluation.study.design`: the tasks, arms, groups of arms and fixed constants (data, no imports);
- :mod:`~evaluation.study.history`: the order of decisions and the pre-registration check, read from git;
- :mod:`~evaluation.study.stats`: the statistics (intervals, tests, Holm, equivalence, the failed-run rule), pure
  functions;
- :mod:`~evaluation.study.summaries`: the runs as data (one summary per run, grouped by task, arm and seed);
- :mod:`~evaluation.study.decisions`: what the study decides from them (verdicts, families of tests, checks);
- :mod:`~evaluation.study.tables`, :mod:`~evaluation.study.position_report`, :mod:`~evaluation.study.plots`: the
  report's sections and figures;
- :mod:`~evaluation.study.report`: the report assembled and written (``docs/study/README.md``);
- :mod:`~evaluation.study.findings`: the README's study section, written from the same summaries;
- :mod:`~evaluation.study.positions`: the sampler of where the long responses changed (``positions.jsonl``);
- :mod:`~evaluation.study.runner`: trains the runs and calls the report (``python -m evaluation.study``).

``python -m evaluation.study_report``, ``python -m evaluation.study_findings`` and
``python -m evaluation.study_positions`` remain the command lines of the report, the findings and the sampler.
"""
