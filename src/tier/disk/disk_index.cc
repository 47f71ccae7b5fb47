#include "src/tier/disk/disk_index.h"

namespace kvtier::disk {

DiskIndex::DiskIndex(size_t tenants)
    : lists_(tenants), set_(0, SlotHash{&slab_}, SlotEq{&slab_}) {}

uint32_t DiskIndex::Find(uint16_t tenant, const BlockKey& key) const {
  auto it = set_.find(Probe{tenant, &key});
  return it == set_.end() ? kNoEntry : *it;
}

uint32_t DiskIndex::Insert(const DiskEntry& entry) {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
    slab_[index] = entry;
  } else {
    index = static_cast<uint32_t>(slab_.size());
    slab_.push_back(entry);
  }
  DiskEntry& e = slab_[index];
  e.in_use = true;
  e.prev = e.next = kNoEntry;
  set_.insert(index);
  Link(index);
  return index;
}

void DiskIndex::Remove(uint32_t index) {
  set_.erase(index);
  Unlink(index);
  slab_[index].in_use = false;
  free_.push_back(index);
}

void DiskIndex::MoveToBack(uint32_t index) {
  Unlink(index);
  Link(index);
}

void DiskIndex::Reserve(size_t entries) {
  slab_.reserve(entries);
  set_.reserve(entries);
}

size_t DiskIndex::MemoryBytes() const {
  return slab_.capacity() * sizeof(DiskEntry) + free_.capacity() * sizeof(uint32_t) +
         set_.capacity() * (sizeof(uint32_t) + 1) + lists_.capacity() * sizeof(List);
}

void DiskIndex::Link(uint32_t index) {
  DiskEntry& e = slab_[index];
  List& l = lists_[e.tenant];
  e.prev = l.tail;
  e.next = kNoEntry;
  if (l.tail != kNoEntry) {
    slab_[l.tail].next = index;
  } else {
    l.head = index;
  }
  l.tail = index;
}

void DiskIndex::Unlink(uint32_t index) {
  DiskEntry& e = slab_[index];
  List& l = lists_[e.tenant];
  if (e.prev != kNoEntry) {
    slab_[e.prev].next = e.next;
  } else {
    l.head = e.next;
  }
  if (e.next != kNoEntry) {
    slab_[e.next].prev = e.prev;
  } else {
    l.tail = e.prev;
  }
  e.prev = e.next = kNoEntry;
}

}  // namespace kvtier::disk
