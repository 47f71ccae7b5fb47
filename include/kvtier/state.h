// State beside KV: what hybrid models (recurrent, linear-attention and Mamba layers beside
// full attention), sliding-window models and sparse-attention models need, besides the KV of
// their full-attention layers, to resume a prompt at a block boundary (docs/state.md).
//
// A state group is a named family of values that hang off the block keys of a namespace's
// chains. The value of group g at block i is an ordinary block stored under StateKey(k_i, g),
// with k_i as its parent and BlockRole::kState, so that eviction, demotion, G4, retention,
// deletion, compression, encryption, pins, events and warm restarts treat it as they treat
// blocks. A group's window says which of its values a resume after block i (a prefix of i + 1
// blocks) needs:
//   window 0       the values of every block 0..i: a per-token cache every later token reads
//                  (DeepSeek V3.2's indexer keys; SGLang's "all_pages" pools);
//   window w >= 1  the values of the last w blocks, i-w+1..i (those that exist): a sliding-
//                  window layer's KV over w blocks; w = 1 is one state at the boundary itself
//                  (recurrent, linear-attention and Mamba states; SGLang's "trailing_pages").
//
// Store::LookupResume answers the longest prefix whose KV and every named group's values are
// all present, so an engine never resumes from a partial state; Store::PutAtomic stores a
// boundary's values together with its KV block, so readers see all of them or none.
//
// All functions here are pure and thread-safe.

#ifndef KVTIER_STATE_H_
#define KVTIER_STATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier {

// Group names are 1 to kMaxStateGroupBytes bytes of letters, digits and ._-:/@ (SGLang's pool
// names with a component, "mamba/conv_0", are examples).
inline constexpr size_t kMaxStateGroupBytes = 128;
// Most groups one lookup may name.
inline constexpr size_t kMaxStateGroups = 64;

struct StateGroup {
  std::string name;
  // Which values a resume needs (above): 0 every block's, w >= 1 the last w blocks'.
  uint32_t window_blocks = 1;
};

// InvalidArgument naming what is wrong with the group's name.
Status ValidateStateGroupName(std::string_view name);

// The key of group `group`'s value at the block whose key is `block` (docs/block_keys.md,
// "State keys"): SHA256("kvtier/state/v1" || block || u32(len(group)) || group).
// InvalidArgument for a name ValidateStateGroupName refuses.
Result<BlockKey> StateKey(const BlockKey& block, std::string_view group);

// What a resume lookup asks besides the keys.
struct ResumeQuery {
  // Keys per block of the prompt, in order: a block is present when all of its keys are (an
  // engine that stores K and V apart gives 2), and its state values hang off its first key.
  uint32_t keys_per_block = 1;
  // The groups the engine restores; none: a plain prefix lookup, in blocks.
  std::vector<StateGroup> groups;
  // Also list every length the engine can resume from (ResumeMatch::resumable).
  bool all_lengths = false;
};

}  // namespace kvtier

#endif  // KVTIER_STATE_H_
