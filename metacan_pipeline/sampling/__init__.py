"""Sample design: strata, selection probabilities, design weights (SPEC section 5)."""
