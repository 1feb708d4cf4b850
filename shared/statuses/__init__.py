"""Where a window becomes a status: Burrow's rules (rules.py) applied to stored windows (verdicts.py), lag in
seconds, velocity, retention risk, explanations, and the results the api serves. Pure rules, no I/O, except the
results store; shared by the evaluator, the api and the Spark replay."""
