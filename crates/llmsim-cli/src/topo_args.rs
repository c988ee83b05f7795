//! Topology flags shared by `collective` and `topo`, turned into an `llmsim_topo::TopologySpec`.

use std::path::PathBuf;

use anyhow::{Result, anyhow, bail};
use clap::Args;
use llmsim_ccl::tuning::GpuArch;
use llmsim_compute::GpuSpec;
use llmsim_core::{Bandwidth, SimTime, parse_field};
use llmsim_topo::{ScaleUp, Topology, TopologySpec};
use serde_json::{Map, Value, json};

/// `--topology`'s help: every kind the topology spec declares.
fn kinds_help() -> String {
    format!("{}.", llmsim_topo::spec::kinds().join(", "))
}

#[derive(Args, Debug, Clone)]
pub struct TopoArgs {
    /// The topology family (`topology.kind`); the list comes from `llmsim_topo::spec::kinds`.
    #[arg(long = "topology", visible_alias = "kind", default_value = "rail-fat-tree", help = kinds_help())]
    pub kind: String,
    /// GPUs in the cluster. Default: all hosts of a fat-tree with --k, or of an --ns3-file.
    #[arg(long)]
    pub gpus: Option<u32>,
    /// GPUs per server, sharing one NVSwitch (1 = no scale-up domain).
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// GPU type from the catalog: A100, H100, H800, H20, H200, B200 (sets NVLink bandwidth and NCCL's architecture).
    #[arg(long, default_value = "H100")]
    pub gpu: String,
    /// NVLink bandwidth per GPU per direction. Default from --gpu (H100: 450GBps).
    #[arg(long)]
    pub nvlink: Option<String>,
    /// NIC bandwidth per GPU ("400Gbps").
    #[arg(long, default_value = "400Gbps")]
    pub nic: String,
    /// NIC link latency. Default 500ns.
    #[arg(long)]
    pub nic_latency: Option<String>,
    /// Switch-to-switch link bandwidth. Default: the generator's (400Gbps).
    #[arg(long)]
    pub fabric: Option<String>,
    /// Switch-to-switch link latency. Default 600ns.
    #[arg(long)]
    pub fabric_latency: Option<String>,
    /// Fat-tree radix k (even).
    #[arg(long)]
    pub k: Option<u32>,
    /// Spine switches (spine-leaf, rail-fat-tree; pod spines per pod for three-tier). Give this or
    /// --oversubscription.
    #[arg(long)]
    pub spines: Option<u32>,
    /// Leaf downlink:uplink ratio, e.g. 3 for 3:1 (spine-leaf, rail-fat-tree, three-tier).
    #[arg(long)]
    pub oversubscription: Option<f64>,
    /// Hosts per leaf (spine-leaf). Default 32.
    #[arg(long)]
    pub hosts_per_leaf: Option<u32>,
    /// Servers per segment (rail-fat-tree, three-tier). Default 32.
    #[arg(long)]
    pub servers_per_segment: Option<u32>,
    /// Two independent planes, each NIC port on one (rail-fat-tree).
    #[arg(long)]
    pub dual_plane: bool,
    /// A family parameter as KEY=VALUE (JSON value), repeatable: `--topo-param dims=[8,8,16]`,
    /// `--topo-param global_links_per_router=8`.
    #[arg(long)]
    pub topo_param: Vec<String>,
    /// ns-3 topology file (with --topology ns3).
    #[arg(long)]
    pub ns3_file: Option<PathBuf>,
    /// Seed for ECMP hashing.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl TopoArgs {
    fn gpu_spec(&self) -> Result<&'static GpuSpec> {
        llmsim_compute::gpu(&self.gpu).map_err(|e| anyhow!("--gpu: {e}"))
    }

    pub fn arch(&self) -> Result<GpuArch> {
        Ok(self.gpu_spec()?.arch)
    }

    pub fn nvlink_bandwidth(&self) -> Result<Bandwidth> {
        match &self.nvlink {
            Some(s) => Ok(parse_field("--nvlink", s)?),
            None => Ok(self.gpu_spec()?.nvlink_bandwidth),
        }
    }

    pub fn nic_bandwidth(&self) -> Result<Bandwidth> {
        let b: Bandwidth = parse_field("--nic", &self.nic)?;
        if b.is_zero() {
            bail!("--nic: bandwidth must be positive, e.g. \"400Gbps\"");
        }
        Ok(b)
    }

    fn link(&self, bw: Option<&str>, lat: Option<&str>, bw_field: &str, lat_field: &str) -> Result<Value> {
        let mut m = Map::new();
        if let Some(b) = bw {
            let v: Bandwidth = parse_field(bw_field, b)?;
            m.insert("bandwidth".into(), json!(v.to_string()));
        }
        if let Some(l) = lat {
            let v: SimTime = parse_field(lat_field, l)?;
            m.insert("latency".into(), json!(v.to_string()));
        }
        Ok(Value::Object(m))
    }

    /// The topology spec these flags describe.
    pub fn spec(&self) -> Result<TopologySpec> {
        self.nic_bandwidth()?;
        let nic = self.link(Some(&self.nic), self.nic_latency.as_deref(), "--nic", "--nic-latency")?;
        let fabric = self.link(
            self.fabric.as_deref(),
            self.fabric_latency.as_deref(),
            "--fabric",
            "--fabric-latency",
        )?;
        let kind = self.kind.to_ascii_lowercase();
        let mut v = json!({ "kind": kind });
        let o = v.as_object_mut().expect("object");
        let reject = |flag: &str, given: bool| -> Result<()> {
            if given {
                bail!("{flag} does not apply to --topology {kind}");
            }
            Ok(())
        };
        match kind.as_str() {
            "flat" => {
                o.insert("nic".into(), nic);
            }
            "fat-tree" => {
                if let Some(k) = self.k {
                    o.insert("k".into(), json!(k));
                }
                o.insert("host_link".into(), nic);
                o.insert("edge_agg".into(), fabric.clone());
                o.insert("agg_core".into(), fabric);
            }
            "spine-leaf" => {
                self.put_spines(o);
                if let Some(h) = self.hosts_per_leaf {
                    o.insert("hosts_per_leaf".into(), json!(h));
                }
                o.insert("nic".into(), nic);
                o.insert("uplink".into(), fabric);
            }
            "rail-fat-tree" | "rail-optimized" => {
                self.put_spines(o);
                if let Some(s) = self.servers_per_segment {
                    o.insert("servers_per_segment".into(), json!(s));
                }
                o.insert("dual_plane".into(), json!(self.dual_plane));
                o.insert("nic".into(), nic);
                o.insert("uplink".into(), fabric);
            }
            // Links are per tier: `--topo-param 'tiers=[{"radix":64,"link":{"bandwidth":"800Gbps"}}, ...]'`.
            "clos" => {
                reject("--fabric/--fabric-latency", fabric.as_object().is_some_and(|m| !m.is_empty()))?;
                reject("--spines", self.spines.is_some())?;
                reject("--oversubscription", self.oversubscription.is_some())?;
            }
            "ns3" => {
                let p = self
                    .ns3_file
                    .as_ref()
                    .ok_or_else(|| anyhow!("--topology ns3 needs --ns3-file PATH"))?;
                o.insert("path".into(), json!(p));
            }
            // One-file families (torus, dragonfly, rail-only, ...): the spec's serde names the kind
            // and its fields; every such family takes `nic`, and those with switch-to-switch
            // links `fabric` (BCube has none: --fabric is refused there as an unknown field).
            _ => {
                self.put_spines(o);
                o.insert("nic".into(), nic);
                if fabric.as_object().is_some_and(|m| !m.is_empty()) {
                    o.insert("fabric".into(), fabric);
                }
                reject("--hosts-per-leaf", self.hosts_per_leaf.is_some())?;
                // Families that take it (three-tier) get it; the others' specs refuse the field.
                if let Some(s) = self.servers_per_segment {
                    o.insert("servers_per_segment".into(), json!(s));
                }
            }
        }
        for kv in &self.topo_param {
            let (k, val) = kv
                .split_once('=')
                .ok_or_else(|| anyhow!("--topo-param {kv:?}: expected KEY=VALUE, e.g. dims=[8,8,16]"))?;
            let val = serde_json::from_str(val).unwrap_or_else(|_| json!(val));
            o.insert(k.to_string(), val);
        }
        reject("--k", self.k.is_some() && kind != "fat-tree")?;
        reject("--dual-plane", self.dual_plane && !kind.starts_with("rail"))?;
        reject("--ns3-file", self.ns3_file.is_some() && kind != "ns3")?;
        serde_json::from_value(v).map_err(|e| anyhow!("topology: {e}"))
    }

    fn put_spines(&self, o: &mut Map<String, Value>) {
        if let Some(s) = self.spines {
            o.insert("spines".into(), json!(s));
        }
        if let Some(r) = self.oversubscription {
            o.insert("oversubscription".into(), json!(r));
        }
    }

    pub fn scale_up(&self) -> Result<ScaleUp> {
        if self.gpus_per_node == 0 {
            bail!("--gpus-per-node: must be at least 1");
        }
        if self.gpus_per_node == 1 {
            return Ok(ScaleUp::none());
        }
        Ok(ScaleUp {
            gpus_per_server: self.gpus_per_node,
            bandwidth: self.nvlink_bandwidth()?,
            latency: ScaleUp::dgx_h100().latency,
        })
    }

    /// GPUs to build for: `--gpus`, else the natural size of the topology.
    fn gpus(&self) -> Result<u32> {
        if let Some(g) = self.gpus {
            if g == 0 {
                bail!("--gpus: must be at least 1");
            }
            return Ok(g);
        }
        match (self.kind.as_str(), self.k) {
            ("fat-tree", Some(k)) => Ok(k.saturating_mul(k).saturating_mul(k) / 4),
            ("ns3", _) => Ok(0),
            _ => bail!("--gpus: how many GPUs? e.g. --gpus 128"),
        }
    }

    pub fn build(&self) -> Result<Topology> {
        let spec = self.spec()?;
        let su = self.scale_up()?;
        let gpus = self.gpus()?;
        let t = if gpus == 0 {
            // ns-3 file: as many GPUs as it has hosts.
            let probe = spec.build(1, ScaleUp::none(), self.seed)?;
            spec.build(
                probe.num_hosts(),
                if probe.num_hosts() % su.gpus_per_server == 0 {
                    su
                } else {
                    ScaleUp::none()
                },
                self.seed,
            )?
        } else {
            spec.build(gpus, su, self.seed)?
        };
        Ok(t)
    }
}
