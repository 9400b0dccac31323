#include "catalog/internal/shared_catalog.h"

namespace gfrep::catalog::internal {

SharedCatalog::SharedCatalog(std::unique_ptr<KvCatalog> inner) : inner_(std::move(inner)) {
  watch_ = inner_->store().WatchWrites([c = inner_.get()] { c->OnExternalWrite(); });
}

SharedCatalog::~SharedCatalog() { watch_.reset(); }

}  // namespace gfrep::catalog::internal
