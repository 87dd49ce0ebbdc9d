"""Study design against MEDLINE: NLM publication types of the frame's works with a PMID (E-utilities, archived and
replayable) as the one external reference of the ``study_design`` labels (SPEC section 11)."""
