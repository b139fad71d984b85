//! Dynamo's router policy YAML: raw schema, validation with locations, and class resolution.
