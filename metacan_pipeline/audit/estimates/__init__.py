"""The audit study's estimates: agreement, design-based rates, prediction-powered prevalence, the gate, the report."""
