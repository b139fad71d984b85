//! Router-side load tracking per worker rank: active prefill tokens, active blocks, requests.
