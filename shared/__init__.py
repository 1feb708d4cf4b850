"""What two or more lagwatch processes share (no service imports another; they meet at Redis keys and topics).

config.py (the one configuration model), clock.py (the one clock), and the groups: domain/ (rules, windows, events:
pure), store/ (Redis keys, scripts and stores; history files), kafka/ (clients, codec, topics), runtime/ (service
life cycle, health server), delivery/ (address guard, TLS, signing), subscriptions/, templating/, schemas/.
"""
