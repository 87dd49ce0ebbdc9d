"""The teachers' core: the registry, prompts, record views, label rules, the label store, the labelling engine and
its export, the qualification test, agreement, the reference set and label batches."""
