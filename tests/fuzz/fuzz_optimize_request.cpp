// tests/fuzz/fuzz_optimize_request.cpp — fuzzes a POST /placements body as the service checks it.
//
// Input: any bytes, the body text. It goes the way the router sends it:
// service/request_check.h parse_json_body (nesting limit, JSON) then
// check_submission (top-level fields, model name / inline graph / uploaded
// file, placer's optimize_request_from_json for options and cluster, remote
// hosts against an allow-list of one host).
// Properties: no crash, no exception and no undefined behaviour; a refusal is
// a 4xx naming a field; an accepted request without an upload is accepted
// again as stored (the job store keeps exactly what was checked).
// Seeds: schemas/examples/job/{valid,invalid}.
#include "fuzz_support.h"
#include "service/request_check.h"

using namespace tapp;
using namespace tapp::service;

namespace {

const CheckLimits& limits() {
  static const CheckLimits l = [] {
    CheckLimits x;
    x.max_upload_bytes = 64 * 1024;
    x.allowed_remote_hosts = {"10.0.0.2"};
    return x;
  }();
  return l;
}

void check_refusal(const FieldError& err, const std::string& body) {
  FUZZ_CHECK(err.http_status >= 400 && err.http_status < 500, "a refusal that is not a 4xx: " + body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = fuzz::as_text(data, size);
  nlohmann::json body;
  FieldError err;
  if (!parse_json_body(text, limits().max_depth, body, err)) {
    check_refusal(err, text);
    return 0;
  }
  Submission sub;
  if (!check_submission(body, limits(), sub, err)) {
    check_refusal(err, text);
    return 0;
  }
  FUZZ_CHECK(sub.request.is_object(), "an accepted request is not an object: " + text);
  if (!sub.upload.empty()) return 0;  // stored with the file's name and size, not its bytes
  Submission again;
  FieldError again_err;
  FUZZ_CHECK(check_submission(sub.request, limits(), again, again_err),
             "the stored request is refused (" + again_err.error + "): " + sub.request.dump());
  return 0;
}
