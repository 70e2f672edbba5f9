"""The small world the search tests build (a few hundred passages instead of tens of thousands)."""

SMALL = {"cities": 300, "towns": 20, "companies": 30, "people": 60, "distractors": 100}
