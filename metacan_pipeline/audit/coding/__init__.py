"""The coding store of the audit study and what feeds it: tasks from the audit sample, Label Studio imports, machine
adjudicators' verdicts (see the package README one level up)."""
