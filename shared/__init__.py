"""The common library: types, rules, windows, codecs, config and storage shared by every service."""
