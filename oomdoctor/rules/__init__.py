"""Stage 5, rules: the flat features rules read, the TOML rule schema, the engine that evaluates
them, the verdict drawn from what fired, and each rule's self-test on its fixtures."""
