//! ns-3 RDMA `config.txt`: any text parsed as a config. Must return Ok or Err, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsim_net::packet::ns3;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = ns3::parse_config(&text, "config.txt").map_err(|e| e.to_string());
});
