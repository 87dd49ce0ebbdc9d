"""Student classifiers distilled from the teachers, calibration, predictions, machine scores (SPEC 6-7)."""
