//! Mock aggregated worker modelled on Dynamo's mocker (vLLM-style core).
