//! Hugging Face `config.json`: any text parsed into a model, which is then validated and
//! counted (parameters, active parameters). Must return Ok or Err, never panic or wrap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsim_workload::model;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = model::from_hf_config_json(&text, "fuzz") {
        if m.validate().is_ok() {
            let _ = (m.param_count(), m.active_param_count());
        }
    }
});
