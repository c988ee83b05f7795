//! Chakra reader: any bytes, read as two ranks' traces (split at a position the first two bytes
//! choose), then imported with a fixed communicator-group map. Must return Ok or Err, never panic.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use llmsim_workload::chakra::{self, ImportOptions};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let split = 2 + (u16::from_le_bytes([data[0], data[1]]) as usize) % (data.len() - 1);
    let (a, b) = data[2..].split_at((split - 2).min(data.len() - 2));
    let mut traces = Vec::new();
    for (r, bytes) in [a, b].into_iter().enumerate() {
        match chakra::decode(bytes, "fuzz.et", r as u32) {
            Ok(t) => traces.push(t),
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        }
    }
    let mut groups = BTreeMap::new();
    groups.insert("0".to_string(), vec![0u32, 1]);
    groups.insert("1".to_string(), vec![0u32]);
    groups.insert("2".to_string(), vec![1u32]);
    let opts = ImportOptions {
        groups_file: Some("groups.json".into()),
        gpus_per_node: 8,
    };
    match chakra::import(&traces, &groups, &opts) {
        Ok(_) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // One rank alone too (peers out of range, groups naming a missing rank).
    let _ = chakra::import(&traces[..1], &BTreeMap::new(), &ImportOptions::default()).map_err(|e| e.to_string());
});
