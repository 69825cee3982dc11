// Package hfcache finds models in a local Hugging Face hub cache, offline.
//
// The cache is laid out as huggingface_hub writes it: a model org/name
// lives in models--org--name/ under the cache directory; refs/<revision>
// there holds the 40-hex commit hash the revision points at, and
// snapshots/<hash>/ holds the model's files, as symbolic links into
// blobs/. Nothing here reaches the network: a model that is not in the
// cache is an error saying what is missing and where.
package hfcache
