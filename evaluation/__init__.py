"""Evaluation of trained policies; :mod:`evaluation.pass_at_k` executes sampled programs and reports pass@k
for program synthesis (paper §4.5, Table 3)."""
