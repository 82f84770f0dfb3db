// English passages for the benchmarks: real prose, so the token mix (and, for `blend`, the spread
// of KV deviations) is realistic. Timing only; no output is checked against them.
#pragma once
#include <array>

namespace ragkv {

inline constexpr std::array<const char*, 6> kBenchPassages = {
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
    "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland "
    "and Norway who, under their leader Rollo, agreed to swear fealty to King Charles III of West "
    "Francia. Through generations of assimilation and mixing with the native Frankish and "
    "Roman-Gaulish populations, their descendants would gradually merge with the Carolingian-based "
    "cultures of West Francia. ",
    "A river delta forms where a river meets slower water, such as a sea or a lake, and drops the "
    "sediment it carried. Over centuries the deposits build land that splits the river into many "
    "channels. Deltas are among the most fertile and densely farmed places on earth, and many of "
    "them sink slowly as the soft ground compacts and dams upstream hold back new sediment. ",
    "The steam engine changed the mills of northern England within two generations. Water wheels "
    "had tied each mill to a fast stream; coal and steam let owners build near canals, ports and "
    "towns instead. Cotton output rose many times over, while workers moved from farms into crowded "
    "streets that grew faster than their drains, schools and churches. ",
    "Honey bees share the location of food by dancing on the comb. A forager that found flowers "
    "close to the hive circles in a round dance; for distant food she runs a waggle dance whose "
    "angle from vertical gives the direction relative to the sun and whose length gives the "
    "distance. Other workers follow the dance and then fly out to search. ",
    "The first transatlantic telegraph cable was laid in 1858 between Ireland and Newfoundland. "
    "Queen Victoria and President Buchanan exchanged messages over it, but the signal was weak and "
    "slow, and an engineer who raised the voltage to push it through destroyed the insulation "
    "within weeks. A lasting cable was only laid in 1866 by the steamship Great Eastern. ",
    "Glaciers move because ice deforms under its own weight and slides over meltwater at its base. "
    "As a glacier flows it plucks rock from the valley floor and grinds it into fine flour, which "
    "gives meltwater lakes their milky green colour. When the ice retreats it leaves moraines, "
    "scattered boulders and U-shaped valleys that outlast it by thousands of years. ",
};

inline constexpr const char* kBenchQuestion = "Which of these passages mentions a cable laid by a steamship, and in what year?";

}  // namespace ragkv
