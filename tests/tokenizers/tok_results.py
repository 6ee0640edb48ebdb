"""tok_results.py: the agreement rows the comparison tests record and conftest.py prints:
(check, corpus source or "all", lines equal, lines in total)."""
AGREEMENT = []
