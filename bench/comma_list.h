// hattn/bench/comma_list.h -- the plain benchmark programs' comma-separated option values
// ("--variants base,lazy", "--seqlens 2048,8192").
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace hattn::bench {

// The non-empty items of a comma-separated list, in order.
inline std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

}  // namespace hattn::bench
