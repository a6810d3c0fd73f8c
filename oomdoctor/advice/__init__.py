"""Stage 6, advice: actions with computed values, in the terms of the engine that printed the
log. registry.py maps each advice kind a rule can name (rules/schema.py ADVICE_KINDS) and engine
to its generator; context.py is what every generator reads."""
