//! Reading and writing NumPy `.npy` files (format versions 1.0–3.0, C order, little-endian).
//!
//! Model inputs and outputs cross the command line as `.npy` files, and reference outputs from the
//! official interpreter are stored the same way.

use crate::DType;

/// A dense array as stored in a `.npy` file: element type, shape and raw little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// Why a `.npy` file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("not a .npy file (bad magic)")]
    BadMagic,
    #[error("truncated .npy file: {0}")]
    Truncated(&'static str),
    #[error("unsupported .npy version {0}.{1}")]
    Version(u8, u8),
    #[error("malformed .npy header: {0}")]
    Header(String),
    #[error(
        "unsupported .npy element type '{0}' (tandem reads <f4, <f2, <f8, <i4, <i8, |i1, |u1, |b1)"
    )]
    DType(String),
    #[error(".npy data is {actual} bytes but shape {shape:?} of {dtype} needs {expected}")]
    Size {
        shape: Vec<usize>,
        dtype: DType,
        expected: usize,
        actual: usize,
    },
}

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr_of(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::F64 => "<f8",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
        _ => return None,
    })
}

fn dtype_of(descr: &str) -> Option<DType> {
    Some(match descr {
        "<f4" => DType::F32,
        "<f2" => DType::F16,
        "<f8" => DType::F64,
        "<i4" => DType::I32,
        "<i8" => DType::I64,
        "|i1" | "<i1" => DType::I8,
        "|u1" | "<u1" => DType::U8,
        "|b1" | "<b1" => DType::Bool,
        _ => return None,
    })
}

impl NpyArray {
    /// An f32 array from values; `values.len()` must equal the product of `shape`.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Self {
        assert_eq!(
            shape.iter().product::<usize>(),
            values.len(),
            "shape/value count mismatch"
        );
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        NpyArray {
            dtype: DType::F32,
            shape,
            data,
        }
    }

    /// The values of an f32 array, or `None` for another element type.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == DType::F32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }

    /// Parses a whole `.npy` file.
    pub fn parse(bytes: &[u8]) -> Result<Self, NpyError> {
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err(if bytes.len() < 10 && MAGIC.starts_with(bytes) {
                NpyError::Truncated("header")
            } else {
                NpyError::BadMagic
            });
        }
        let (major, minor) = (bytes[6], bytes[7]);
        let (header_len, header_start) = match major {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
            2 | 3 => {
                if bytes.len() < 12 {
                    return Err(NpyError::Truncated("header length"));
                }
                let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
                (len as usize, 12)
            }
            _ => return Err(NpyError::Version(major, minor)),
        };
        let header_end = header_start
            .checked_add(header_len)
            .filter(|&end| end <= bytes.len())
            .ok_or(NpyError::Truncated("header"))?;
        let header = std::str::from_utf8(&bytes[header_start..header_end])
            .map_err(|_| NpyError::Header("header is not UTF-8".into()))?;
        let descr = dict_value(header, "descr")?;
        let descr = descr.trim_matches(|c| c == '\'' || c == '"');
        let dtype = dtype_of(descr).ok_or_else(|| NpyError::DType(descr.to_string()))?;
        if dict_value(header, "fortran_order")? != "False" {
            return Err(NpyError::Header(
                "Fortran-order arrays are not supported".into(),
            ));
        }
        let shape = parse_shape(dict_value(header, "shape")?)?;
        let data = &bytes[header_end..];
        let elem = dtype.size_bytes().unwrap_or(1);
        let expected = shape
            .iter()
            .try_fold(elem, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| NpyError::Header("shape overflows".into()))?;
        if data.len() != expected {
            return Err(NpyError::Size {
                shape,
                dtype,
                expected,
                actual: data.len(),
            });
        }
        Ok(NpyArray {
            dtype,
            shape,
            data: data.to_vec(),
        })
    }

    /// Encodes the array as a version 1.0 `.npy` file.
    ///
    /// Panics only if the element type has no `.npy` spelling (see [`NpyError::DType`] for the
    /// supported set); callers hold arrays they parsed or built from those types.
    pub fn to_bytes(&self) -> Vec<u8> {
        let descr = descr_of(self.dtype).unwrap_or("|u1");
        let shape = match self.shape.len() {
            1 => format!("({},)", self.shape[0]),
            _ => format!(
                "({})",
                self.shape
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        // Pad so that the data starts on a 64-byte boundary, header ends with '\n'.
        let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
        header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + self.data.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&self.data);
        out
    }
}

/// The raw text of `key`'s value in the header's Python dict literal.
fn dict_value<'h>(header: &'h str, key: &str) -> Result<&'h str, NpyError> {
    let missing = || NpyError::Header(format!("no '{key}' in header"));
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))
        .ok_or_else(missing)?;
    let rest = &header[at + key.len() + 2..];
    let rest = rest
        .trim_start()
        .strip_prefix(':')
        .ok_or_else(missing)?
        .trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else {
        rest.find([',', '}'])
    }
    .ok_or_else(missing)?;
    Ok(rest[..end].trim())
}

fn parse_shape(text: &str) -> Result<Vec<usize>, NpyError> {
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| NpyError::Header(format!("bad shape {text}")))?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_end_matches('L')
                .parse()
                .map_err(|_| NpyError::Header(format!("bad dimension '{s}' in shape {text}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_preserves_shape_and_values() {
        for shape in [vec![], vec![3], vec![2, 3], vec![1, 4, 5, 2]] {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 1.0).collect();
            let array = NpyArray::from_f32(shape.clone(), &values);
            let bytes = array.to_bytes();
            assert_eq!((bytes.len() - n * 4) % 64, 0, "data must start 64-aligned");
            let back = NpyArray::parse(&bytes).expect("parses");
            assert_eq!(back.shape, shape);
            assert_eq!(back.to_f32().expect("f32"), values);
        }
    }

    #[test]
    fn reads_numpy_written_header() {
        // Header exactly as numpy 2 writes it for np.zeros((2,3), np.int32).
        let mut bytes = b"\x93NUMPY\x01\x00v\x00".to_vec();
        let mut header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }".to_string();
        while !(10 + header.len() + 1).is_multiple_of(64) {
            header.push(' ');
        }
        header.push('\n');
        bytes[8] = header.len() as u8;
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&[0u8; 24]);
        let array = NpyArray::parse(&bytes).expect("parses");
        assert_eq!(array.dtype, DType::I32);
        assert_eq!(array.shape, vec![2, 3]);
    }

    #[test]
    fn rejects_bad_files_with_reasons() {
        assert!(matches!(NpyArray::parse(b""), Err(NpyError::Truncated(_))));
        assert!(matches!(
            NpyArray::parse(b"PK\x03\x04 zip file"),
            Err(NpyError::BadMagic)
        ));
        let good = NpyArray::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]).to_bytes();
        let err = NpyArray::parse(&good[..good.len() - 1]).expect_err("short data");
        assert!(err.to_string().contains("needs 16"), "{err}");
        let header_cut = &good[..20];
        assert!(matches!(
            NpyArray::parse(header_cut),
            Err(NpyError::Truncated(_))
        ));
    }
}
