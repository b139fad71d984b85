//! The simulated system: clients, the router core, transport delays and mock workers.
