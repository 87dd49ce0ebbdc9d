"""Recall without a probability sample: filter recall and known-item recall on a venue reference set (the\noriginal protocol's instruments ii and iii)."""
