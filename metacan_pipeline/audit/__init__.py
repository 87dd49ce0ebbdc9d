"""The audit study (SPEC section 10): protocol, sample, human coding, estimates and the gate."""
