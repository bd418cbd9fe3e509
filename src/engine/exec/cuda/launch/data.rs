//! A CUDA rank's buffers for the checks: inputs, poison and verification
//! by `kernels/data.cu` on the device; only counters and the first bad
//! element come back.

use super::dev_err;
use super::rank::CudaRank;
use crate::engine::exec::cuda::abi::as_bytes;
use crate::engine::exec::runner::{At, DeviceData};
use crate::engine::exec::world::ExecError;

impl DeviceData for CudaRank {
    /// Each member of a group has tables of its own (its operator's): one
    /// region each, kept until the next operation is loaded. (One region
    /// for all had the last member's tables fill every member's input.)
    fn upload_words(&mut self, words: &[u64]) -> Result<u64, ExecError> {
        let i = self.words_used;
        if i == self.words.len() {
            self.words.push((0, 0));
        }
        self.words[i] = self.region(self.words[i], words.len() * 8)?;
        let at = self.words[i].0;
        self.dev
            .upload(self.stream, at, as_bytes(words))
            .map_err(dev_err)?;
        self.words_used += 1;
        Ok(at)
    }

    fn poison(&mut self, at: At, count: usize) -> Result<(), ExecError> {
        let (f, _) = self.data_fn("cb_poison")?;
        let (grid, threads) = self.data_grid(count);
        let dst = self.addr(at)?;
        self.dev
            .launch(
                f,
                grid,
                threads,
                self.stream,
                &[&dst.to_le_bytes(), &(count as u64).to_le_bytes()],
            )
            .map_err(dev_err)
    }

    fn fill(&mut self, gen: &[u8], rank: u32, at: At, count: usize) -> Result<(), ExecError> {
        let (f, _) = self.data_fn("cb_fill")?;
        let (grid, threads) = self.data_grid(count);
        let dst = self.addr(at)?;
        let args: [&[u8]; 4] = [
            gen,
            &rank.to_le_bytes(),
            &dst.to_le_bytes(),
            &(count as u64).to_le_bytes(),
        ];
        self.dev
            .launch(f, grid, threads, self.stream, &args)
            .map_err(dev_err)?;
        // Inputs are in place before the rank reaches the next barrier.
        self.dev.sync(self.stream).map_err(dev_err)
    }

    fn verify(
        &mut self,
        gen: &[u8],
        expect: &[u8],
        at: At,
        count: usize,
    ) -> Result<([u64; 3], Option<u64>), ExecError> {
        let (f, dtype) = self.data_fn("cb_verify")?;
        let clean: [u64; 4] = [0, 0, u64::MAX, 0];
        self.dev
            .upload(self.stream, self.small, as_bytes(&clean))
            .map_err(dev_err)?;
        let (grid, threads) = self.data_grid(count);
        let recv = self.addr(at)?;
        let args: [&[u8]; 5] = [
            gen,
            expect,
            &recv.to_le_bytes(),
            &(count as u64).to_le_bytes(),
            &self.small.to_le_bytes(),
        ];
        self.dev
            .launch(f, grid, threads, self.stream, &args)
            .map_err(dev_err)?;
        let mut raw = [0u8; 32];
        self.dev
            .download(self.stream, &mut raw, self.small)
            .map_err(dev_err)?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&raw[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let counters = [word(0), word(1), word(2)];
        let mut first_bits = None;
        if counters[0] > 0 && counters[2] != u64::MAX && (counters[2] as usize) < count {
            let es = dtype.size();
            let bytes = self.read((at.0, at.1 + counters[2] as usize * es), es)?;
            let mut w = [0u8; 8];
            w[..es].copy_from_slice(&bytes);
            first_bits = Some(u64::from_le_bytes(w));
        }
        Ok((counters, first_bits))
    }

    fn read(&mut self, at: At, bytes: usize) -> Result<Vec<u8>, ExecError> {
        if at.0 > 2 || at.1 + bytes > self.sizes[at.0] {
            return Err(ExecError::Setup("read outside the rank's buffers".into()));
        }
        let mut out = vec![0u8; bytes];
        self.dev
            .download(self.stream, &mut out, self.addr(at)?)
            .map_err(dev_err)?;
        Ok(out)
    }

    fn write(&mut self, at: At, bytes: &[u8]) -> Result<(), ExecError> {
        if at.0 > 2 || at.1 + bytes.len() > self.sizes[at.0] {
            return Err(ExecError::Setup("write outside the rank's buffers".into()));
        }
        self.dev
            .upload(self.stream, self.addr(at)?, bytes)
            .map_err(dev_err)
    }
}
