"""The domain: what lagwatch knows about consumers, as pure functions and types with no I/O.

Burrow's rules and the window they read (rules.py, window.py, protocol.py), lag in seconds, velocity, retention
risk and explanations, the judging clock (read_through.py), the group filter, and the records lagwatch exchanges:
status and lag-threshold events, history records, `lagwatch rules eval` requests. The evaluator, the api, the
notifier and the Spark replay all use these same functions.
"""
