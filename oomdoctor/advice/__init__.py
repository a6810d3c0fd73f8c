"""Stage 6, advice: actions with computed values, in the terms of the engine that printed the
log. kinds.py names the advice kinds rules can ask for; registry.py maps each kind and engine to
its generator; context.py is what every generator reads."""
