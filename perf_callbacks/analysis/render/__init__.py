"""The readable report: the text summary and the one console line."""
