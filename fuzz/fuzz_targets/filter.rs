//! Sweep filter expressions: any text parsed as a filter and evaluated against a small scenario
//! tree (with the derived name `gpus`). Must return Ok or Err, never panic or overflow the stack.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsim_sweep::filter::{self, Val};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(e) = filter::parse(&text) else { return };
    let tree: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        "parallel: { tp: 4, pp: 2, dp: 0 }\nname: x\ncluster: { gpu: H100, nodes: 2, topology: { nic: { bandwidth: 400Gbps } } }\n",
    )
    .expect("fixed tree");
    let extra = |k: &str| (k == "gpus").then_some(Val::Num(16.0));
    let _ = e.eval(&tree, &extra).and_then(|v| filter::truth(&v));
});
