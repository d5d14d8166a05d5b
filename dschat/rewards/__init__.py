"""Verifiable rewards: execution rewards for program synthesis (paper Appendix B.5: sandboxed execution, test
verdicts, reward) and the answer verifier of reasoning tasks (``verify_answer``)."""
from .answer_verifier import answer_reward, has_answer, verify_answer
from .code_execution import (ExecutionResult, MalformedTaskError, ProgramOutcome, StopPolicy, TestOutcome,
                             apps_test_cases, call_output_matches, execute_program, execute_programs,
                             humaneval_program, stdio_output_matches, validate_task)
from .code_reward import code_reward, extract_code, score_completions
from .sandbox import SandboxError, SandboxLimits

__all__ = [
    "answer_reward", "has_answer", "verify_answer",
    "ExecutionResult", "MalformedTaskError", "ProgramOutcome", "StopPolicy", "TestOutcome", "apps_test_cases",
    "call_output_matches", "execute_program", "execute_programs", "humaneval_program", "stdio_output_matches",
    "validate_task", "code_reward", "extract_code", "score_completions", "SandboxError", "SandboxLimits",
]
