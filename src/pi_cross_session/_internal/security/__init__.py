"""Policy: tokens, file judgement, limits, admission, goals and the tool-call gate."""
