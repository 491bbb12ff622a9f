// The lab's HTML report (`ouro lab report`): one self-contained page over the ledger's records.
//
// Self-contained means no external resource of any kind (no network, fonts, CDN, images): inline
// CSS, inline SVG charts and one small inline script (a verdict filter). A Content-Security-Policy
// meta tag forbids every other source and allows only that exact script (by its SHA-256), so text
// from a record can never run as script even if escaping were missed somewhere.
//
// Stable hooks for tests and readers: table#verdicts with one tr.exp per record (data-verdict),
// select#verdict-filter, svg#trend (candidate medians of the headline metrics over accepted
// records, seq order), and per record section.exp-detail with one svg.chart per sampled metric.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ouro::lab {

// Records in ledger order (any order works; the page lists them newest seq first). Every string
// taken from a record is HTML-escaped; odd or missing fields are shown as "-". Never throws.
std::string render_report(const std::vector<nlohmann::json>& records, const std::string& title);

// HTML-escapes & < > " ' (safe in text and in quoted attribute values).
std::string html_escape(const std::string& s);

}  // namespace ouro::lab
