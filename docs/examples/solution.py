"""A small program to look at statement-level macro actions with the viewer (docs/macro-actions.md,
"See macro actions by eye"):

    .venv/bin/python -m dschat.cli.viewer --termination parsing --parser code --file docs/examples/solution.py
"""


def running_mean(values):
    total = 0.0
    means = []
    for count, value in enumerate(values, start=1):
        total += value
        means.append(total / count)
    return means


if __name__ == "__main__":
    print(running_mean([3, 1, 4, 1, 5]))
