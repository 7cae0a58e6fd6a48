/* Checkpoint file I/O without an engine: durable blob writes that record
 * their chunk checksums, verified reads of whole blobs or byte ranges, and
 * the small atomic files and directory operations of a save (shared by the
 * engine and tools/zero-ckpt).
 *
 * Durability: a blob is written to "<file>.tmp.<pid>", fsync'ed, renamed,
 * and its directory fsync'ed by the caller once all blobs are in place
 * (zero__ck_fsync_dir).  Errors are returned as -1 with a message naming
 * the path and the errno text in err (ENOSPC reads "No space left on
 * device").
 *
 * Test-only fault hooks (tests/ckpt; documented in docs/checkpoints.md),
 * read from the environment at each call:
 *   ZERO_CKPT_FAULT=enospc:N[@R]  the N-th blob written by this process
 *       (rank R only, if given) fails with ENOSPC after half its payload
 *       (streamed blobs count too, as rank 0: the piece crossing the half);
 *   ZERO_CKPT_FAULT=enospc:NAME[@0]  the small file NAME (manifest.json,
 *       latest) written by zero__ck_write_atomic fails with ENOSPC after
 *       half its bytes;
 *   ZERO_CKPT_FAULT=pause:POINT[@R]  at save point POINT (before_shards,
 *       between_shards, before_manifest, before_latest) rank R writes its
 *       pid to $ZERO_CKPT_FAULT_MARKER and sleeps up to 120 s, so that a
 *       test can kill -9 it there.
 * Symbolic links: nothing here deletes or overwrites through one.  Temp
 * files are created O_EXCL | O_NOFOLLOW (a link at the temp name is
 * removed as a link first), renames replace a name, never a link's target,
 * and zero__ck_remove_dir walks by directory fd (docs/checkpoints.md,
 * "Symbolic links").
 * Threads: the reader structure is not shared; everything else is
 * reentrant. */
#ifndef ZERO_CKPT_IO_H
#define ZERO_CKPT_IO_H
#include <stddef.h>
#include <stdint.h>

#include "ckpt_manifest.h"

/* Write `bytes` of buf as blob dir/file (header + payload), durably and
 * atomically.  On success *crc (malloc'ed, caller frees) holds one CRC-32C
 * per chunk_bytes chunk and *nchunks their count.  rank: for fault hooks. */
int zero__ck_write_blob(const char *dir, const char *file, const void *buf, uint64_t bytes, uint64_t chunk_bytes,
                        int rank, uint32_t **crc, uint32_t *nchunks, char *err, size_t errn);

/* The same, streamed: begin declares the payload size, put appends pieces
 * (CRC-32C per chunk computed on the way), end checks the size, fsyncs and
 * renames into place and hands out the checksums (caller frees *crc);
 * abort removes the temp file and frees the writer (after a failed put);
 * a failed begin or end frees it itself. */
typedef struct zero__ck_blob_writer zero__ck_blob_writer;
zero__ck_blob_writer *zero__ck_blob_begin(const char *dir, const char *file, uint64_t bytes, uint64_t chunk_bytes,
                                          char *err, size_t errn);
int zero__ck_blob_put(zero__ck_blob_writer *w, const void *buf, uint64_t n, char *err, size_t errn);
int zero__ck_blob_end(zero__ck_blob_writer *w, uint32_t **crc, uint32_t *nchunks, char *err, size_t errn);
void zero__ck_blob_abort(zero__ck_blob_writer *w);

/* A reader over one checkpoint directory and its manifest: opens files
 * lazily, checks each file's size and header against the manifest before
 * any read, and verifies every chunk it touches (one chunk cached). */
typedef struct zero__ck_reader zero__ck_reader;
zero__ck_reader *zero__ck_reader_open(const char *dir, const zero__ck_manifest *m);
void zero__ck_reader_close(zero__ck_reader *r);
/* Bytes [off, off + n) of file f's payload into dst; -1 with err naming the
 * file on a missing / wrongly sized / foreign file or a checksum mismatch. */
int zero__ck_read(zero__ck_reader *r, const zero__ck_file *f, uint64_t off, void *dst, uint64_t n, char *err,
                  size_t errn);
/* Bytes read from disk so far (tests check that a resharding load reads
 * only what it needs). */
uint64_t zero__ck_reader_bytes(const zero__ck_reader *r);
const zero__ck_manifest *zero__ck_reader_manifest(const zero__ck_reader *r);

/* Read a whole small file (manifest, latest) into a malloc'ed NUL-terminated
 * buffer; -1 if missing (errno kept) or larger than max. */
int zero__ck_slurp(const char *path, size_t max, char **out, size_t *len);
/* Write a small file atomically: tmp, fsync, rename, fsync the directory. */
int zero__ck_write_atomic(const char *dir, const char *name, const char *text, size_t len, char *err, size_t errn);
int zero__ck_fsync_dir(const char *dir);
/* mkdir -p (0777 & umask). */
int zero__ck_mkdirs(const char *dir);
/* (1.7.5) Is `name` (an entry of a checkpoint directory) one libzero
 * writes: "manifest.json", a blob "<x>.rank<R>.bin" / "<x>.pp<S>.rank<R>
 * .bin", or an atomic write's "<x>.tmp.<pid>"?  Anything else is the
 * host's (its data loader state, a tokenizer beside the weights), and
 * libzero never removes it.  Pure. */
int zero__ck_is_own_name(const char *name);
/* Remove a checkpoint directory: libzero's files in it (zero__ck_is_own_name),
 * then itself; 0 also when it does not exist.  Entries libzero did not
 * write (files, subdirectories, links) are left where they are: then -1
 * with ENOTEMPTY, and *kept (may be NULL) counts them (before 1.7.5 every
 * plain file went).  Follows no link: a link (or file) at `dir` is removed
 * as a name, never its target; the directory is opened O_NOFOLLOW and
 * emptied with unlinkat (links inside go as links). */
int zero__ck_remove_dir_kept(const char *dir, int *kept);
/* zero__ck_remove_dir_kept without the count. */
int zero__ck_remove_dir(const char *dir);
/* 1 if path is a symbolic link (lstat), else 0. */
int zero__ck_is_link(const char *path);
/* Create path for writing, new: a link or leftover at the name is removed
 * first (as a name), then O_CREAT | O_EXCL | O_NOFOLLOW.  An fd, or -1. */
int zero__ck_open_new(const char *path);
/* Does path (followed through links as an open or mkdir would: its nearest
 * existing ancestor, resolved) lie in dir or is it dir?  Compared by device
 * and inode, so links and bind mounts do not hide it.  1 yes, 0 no, -1 on
 * an error (errno); shown: path resolved, for messages. */
int zero__ck_path_within(const char *path, const char *dir, char *shown, size_t n);

/* Fault hooks (see above). */
void zero__ck_fault_point(const char *point, int rank);
#endif
