//! Export: a generated workload into per-rank traces and a communicator-group JSON.

use super::*;

/// Per-rank traces of a generated workload.
#[derive(Clone, Debug)]
pub struct Export {
    /// `.et` bytes of every rank.
    pub ranks: Vec<Vec<u8>>,
    /// The communicator-group JSON's content.
    pub groups: BTreeMap<String, Vec<u32>>,
}

fn collective_type(op: CollectiveOp) -> i64 {
    match op {
        CollectiveOp::AllReduce => comm_type::ALL_REDUCE,
        CollectiveOp::AllGather => comm_type::ALL_GATHER,
        CollectiveOp::ReduceScatter => comm_type::REDUCE_SCATTER,
        CollectiveOp::AllToAll => comm_type::ALL_TO_ALL,
        CollectiveOp::Broadcast => comm_type::BROADCAST,
        CollectiveOp::Reduce => comm_type::REDUCE,
    }
}

/// Writes every rank's trace of a generated workload. `seg_time[s]` is segment `s`'s time.
///
/// # Errors
/// An imported workload (export works from a generated one).
pub fn export(wl: &Workload, layout: Layout, seg_time: &[SimTime], info: &TraceInfo) -> Result<Export, ImportError> {
    if wl.explicit.is_some() {
        return Err(ImportError::Invalid(
            "export works on generated workloads, not on imported ones".into(),
        ));
    }
    let mut pg_ids: HashMap<(Group, u32, u32), u32> = HashMap::new();
    let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let seg_flops: Vec<u64> = wl
        .segments
        .iter()
        .map(|s| s.ops.iter().map(|o| o.flops()).sum::<f64>() as u64)
        .collect();
    // Model FLOPs: no recomputation, no optimizer (as the report's MFU counts them).
    let seg_model_flops: Vec<u64> = wl
        .segments
        .iter()
        .map(|s| {
            s.ops
                .iter()
                .filter(|o| {
                    o.pass != Pass::Recompute
                        && !matches!(
                            o.kind,
                            OpSpecKind::Compute {
                                class: OpClass::Optimizer,
                                ..
                            }
                        )
                })
                .map(|o| o.flops())
                .sum::<f64>() as u64
        })
        .collect();
    let seg_bytes: Vec<u64> = wl
        .segments
        .iter()
        .map(|s| {
            s.ops
                .iter()
                .map(|o| match o.kind {
                    OpSpecKind::Compute { bytes, .. } => bytes,
                    OpSpecKind::HostCopy { bytes } => bytes as f64,
                    OpSpecKind::Comm { .. } => 0.0,
                })
                .sum::<f64>() as u64
        })
        .collect();
    let meta = GlobalMetadata {
        version: "0.0.4".into(),
        attr: vec![
            AttributeProto {
                name: "llmsim_layout".into(),
                doc_string: "tp, cp, dp, pp, ep".into(),
                value: Some(AttrValue::Int64List(pb::Int64List {
                    values: vec![
                        layout.tp as i64,
                        layout.cp as i64,
                        layout.dp as i64,
                        layout.pp as i64,
                        layout.ep as i64,
                    ],
                })),
            },
            AttributeProto::string("llmsim_generator", concat!("llmsim ", env!("CARGO_PKG_VERSION"))),
        ]
        .into_iter()
        .chain(info.attrs())
        .collect(),
    };
    let mut ranks = Vec::with_capacity((layout.units() * layout.tp) as usize);
    for u in 0..layout.units() {
        let prog = &wl.stages[layout.stage(u) as usize];
        for lane in 0..layout.tp {
            let rank = layout.rank(u, lane);
            let mut buf: Vec<u8> = Vec::new();
            meta.encode_length_delimited(&mut buf).expect("a Vec grows");
            let mut last: [Option<u64>; Stream::COUNT] = [None; Stream::COUNT];
            for (i, n) in prog.nodes.iter().enumerate() {
                let mut node = pb::Node {
                    id: i as u64,
                    data_deps: prog.deps(i as u32).iter().map(|d| *d as u64).collect(),
                    ctrl_deps: last[n.stream as usize].into_iter().collect(),
                    ..Default::default()
                };
                last[n.stream as usize] = Some(i as u64);
                node.attr.push(AttributeProto::int("llmsim_stream", n.stream as i64));
                match n.kind {
                    DagNodeKind::Comp { segment } => {
                        let s = segment as usize;
                        let ps = seg_time[s].as_ps();
                        node.name = wl.segments[s].name.clone();
                        node.r#type = node_type::COMP;
                        node.duration_micros = (ps + 500_000) / 1_000_000;
                        node.attr.push(AttributeProto::boolean("is_cpu_op", false));
                        node.attr.push(AttributeProto::uint("num_ops", seg_flops[s]));
                        node.attr.push(AttributeProto::uint("llmsim_model_flops", seg_model_flops[s]));
                        node.attr.push(AttributeProto::uint("tensor_size", seg_bytes[s]));
                        node.attr.push(AttributeProto::uint("llmsim_duration_ps", ps));
                    }
                    DagNodeKind::CommColl { op, group, bytes } => {
                        let (key, units) = layout.group_units(u, group).expect("generated workloads have symbolic groups");
                        let spans = group == Group::Tp;
                        let id_key = (group, key, if spans { 0 } else { lane });
                        let next = pg_ids.len() as u32;
                        let id = *pg_ids.entry(id_key).or_insert(next);
                        if id == next {
                            let members: Vec<u32> = if spans {
                                units.iter().flat_map(|v| (0..layout.tp).map(move |l| layout.rank(*v, l))).collect()
                            } else {
                                units.iter().map(|v| layout.rank(*v, lane)).collect()
                            };
                            groups.insert(id.to_string(), members);
                        }
                        node.name = format!("{} {op}", group.name());
                        node.r#type = node_type::COMM_COLL;
                        node.attr.push(AttributeProto::boolean("is_cpu_op", false));
                        node.attr.push(AttributeProto::int("comm_type", collective_type(op)));
                        node.attr.push(AttributeProto::int("comm_size", bytes as i64));
                        node.attr.push(AttributeProto::string("pg_name", &id.to_string()));
                        node.attr.push(AttributeProto::string("llmsim_group", group.name()));
                    }
                    DagNodeKind::CommSend { peer, bytes, tag } | DagNodeKind::CommRecv { peer, bytes, tag } => {
                        let send = matches!(n.kind, DagNodeKind::CommSend { .. });
                        let other = layout.rank(layout.peer_unit(u, peer), lane);
                        let (src, dst) = if send { (rank, other) } else { (other, rank) };
                        node.name = format!("{} {:?} mb{}", if send { "send" } else { "recv" }, tag.dir, tag.microbatch).to_lowercase();
                        node.r#type = if send { node_type::COMM_SEND } else { node_type::COMM_RECV };
                        node.attr.push(AttributeProto::boolean("is_cpu_op", false));
                        node.attr.push(AttributeProto::int("comm_src", src as i64));
                        node.attr.push(AttributeProto::int("comm_dst", dst as i64));
                        node.attr.push(AttributeProto::int("comm_tag", encode_tag(&tag) as i64));
                        node.attr.push(AttributeProto::int("comm_size", bytes as i64));
                    }
                }
                node.encode_length_delimited(&mut buf).expect("a Vec grows");
            }
            debug_assert_eq!(ranks.len() as u32, rank);
            ranks.push(buf);
        }
    }
    Ok(Export { ranks, groups })
}

/// Writes `<dir>/<prefix>.<rank>.et` and `<dir>/groups.json`.
///
/// # Errors
/// A file that cannot be written.
pub fn write_export(e: &Export, dir: &Path, prefix: &str) -> Result<(), ImportError> {
    std::fs::create_dir_all(dir).map_err(|x| io(dir, x))?;
    for (r, bytes) in e.ranks.iter().enumerate() {
        let p = dir.join(format!("{prefix}.{r}.et"));
        std::fs::write(&p, bytes).map_err(|x| io(&p, x))?;
    }
    let p = dir.join("groups.json");
    let text = serde_json::to_string_pretty(&e.groups).expect("a map of lists serializes");
    std::fs::write(&p, text).map_err(|x| io(&p, x))?;
    Ok(())
}
