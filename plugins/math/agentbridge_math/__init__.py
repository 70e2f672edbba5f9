"""Calculator tool agent: arithmetic word problems, a safe calculator tool, exact-answer reward."""
