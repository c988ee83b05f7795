//! Reading: `.et` files into per-rank traces, and the communicator-group JSON.

use super::*;

/// One rank's trace as read from its file.
#[derive(Clone, Debug)]
pub struct RankTrace {
    /// The rank the trace belongs to.
    pub rank: u32,
    /// The file's path, for messages.
    pub file: String,
    /// The trace's `GlobalMetadata`, the file's first message.
    pub metadata: GlobalMetadata,
    /// The nodes, in file order.
    pub nodes: Vec<pb::Node>,
}

/// Decodes one `.et` file's bytes.
///
/// # Errors
/// [`ImportError::Decode`] naming the file, the rank and the node (by position and the id of the
/// last good node) where the bytes stop making sense.
pub fn decode(bytes: &[u8], file: &str, rank: u32) -> Result<RankTrace, ImportError> {
    let mut buf = bytes;
    let err = |what: String, e: prost::DecodeError| ImportError::Decode {
        file: file.into(),
        rank,
        what,
        message: e.to_string(),
    };
    if buf.is_empty() {
        return Err(ImportError::Decode {
            file: file.into(),
            rank,
            what: "GlobalMetadata".into(),
            message: "empty file".into(),
        });
    }
    let metadata = GlobalMetadata::decode_length_delimited(&mut buf).map_err(|e| err("GlobalMetadata".into(), e))?;
    let mut nodes: Vec<pb::Node> = Vec::new();
    while !buf.is_empty() {
        let n = pb::Node::decode_length_delimited(&mut buf).map_err(|e| {
            let after = match nodes.last() {
                Some(l) => format!(" (after node id {})", l.id),
                None => " (the first node)".into(),
            };
            err(format!("node #{}{after}", nodes.len()), e)
        })?;
        nodes.push(n);
    }
    Ok(RankTrace {
        rank,
        file: file.into(),
        metadata,
        nodes,
    })
}

/// Reads `<prefix>.0.et`, `<prefix>.1.et`, ... until the first missing rank.
///
/// # Errors
/// No `<prefix>.0.et`, an unreadable file, or [`decode`]'s errors.
pub fn read_prefix(prefix: &Path) -> Result<Vec<RankTrace>, ImportError> {
    let mut out = Vec::new();
    loop {
        let path = PathBuf::from(format!("{}.{}.et", prefix.display(), out.len()));
        if !path.exists() {
            break;
        }
        let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
        out.push(decode(&bytes, &path.display().to_string(), out.len() as u32)?);
    }
    if out.is_empty() {
        return Err(ImportError::Invalid(format!(
            "no Chakra trace {}.0.et; give the prefix of files named <prefix>.<rank>.et",
            prefix.display()
        )));
    }
    Ok(out)
}

/// Parses a communicator-group JSON, `{"<pg_name>": [rank, ...]}`.
///
/// # Errors
/// [`ImportError::CommGroups`] for anything else.
pub fn parse_comm_groups(text: &str, file: &str) -> Result<BTreeMap<String, Vec<u32>>, ImportError> {
    serde_json::from_str::<BTreeMap<String, Vec<u32>>>(text).map_err(|e| ImportError::CommGroups {
        file: file.into(),
        message: e.to_string(),
    })
}
