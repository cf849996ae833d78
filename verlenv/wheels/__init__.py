"""Lock -> hash-checked wheels in the content-addressed cache."""
